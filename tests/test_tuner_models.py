"""Surrogates, evaluation, ANOVA and search on the dataset shipped in tuner/data/."""
from __future__ import annotations

import json
import os
import pickle
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import yaml
from click.testing import CliRunner

from asgard.tuner.anova import knee, rank
from asgard.tuner.calibrate import read_rows
from asgard.tuner.cli import tune
from asgard.tuner.costbenefit import decide
from asgard.tuner.dataset import DEFAULT_DATASET, DEFAULT_MODEL, DEFAULT_RANKING, Dataset
from asgard.tuner.evaluate import evaluate
from asgard.tuner.knobs import KNOBS, Configuration
from asgard.tuner.search import compare, load_config_file, search
from asgard.tuner.surrogates import (
    MODEL_FORMAT_VERSION, LightGBMSurrogate, MLPEnsemble, ModelFileError, ModelFormatError, PickledModelError,
    Surrogate, pick_best,
)
from asgard.tuner.workload import Workload

REPO = Path(__file__).resolve().parent.parent
#: the shipped model's predictions on tuner/data/calibration.jsonl, computed from the pickle it replaced
SHIPPED_PREDICTIONS = Path(__file__).resolve().parent / "data" / "shipped_model_predictions.json"


@pytest.fixture(scope="module")
def ds():
    return Dataset.load()


def test_shipped_dataset_is_real_and_small(ds):
    weights = DEFAULT_MODEL.parent / json.loads(DEFAULT_MODEL.read_text())["weights"]
    assert DEFAULT_DATASET.stat().st_size < 3_000_000 and weights.stat().st_size < 3_000_000
    assert len(ds) >= 250
    assert len(np.unique(ds.config_ids)) >= 40 and len(ds.workloads()) >= 6
    # every DAG pattern the topology analyzer names, at several sizes and compressibilities
    assert {w.pattern for w in ds.workloads()} >= {"scatter", "broadcast", "shuffle", "fanin"}
    assert len({w.object_kib for w in ds.workloads()}) >= 3 and len({w.compressibility for w in ds.workloads()}) == 2
    for r in ds.rows:  # paired: the row's ratio is the geometric mean of its pairs
        assert len(r["ratios"]) >= 2 and r["baseline_ops_per_s"] > 0 and r["candidate_ops_per_s"] > 0
        assert r["ratio"] == pytest.approx(float(np.exp(np.mean(np.log(r["ratios"])))), rel=1e-3)
    assert len(ds.noise_rows()) >= 2 * len(ds.workloads())  # the default against itself, twice
    assert ds.median_restart_seconds() > 1  # measured, not assumed


def test_mlp_ensemble_is_rafikis(ds):
    m = MLPEnsemble(epochs=300).fit(ds.X, ds.y, ds.space)
    assert m.hidden == (14, 4) and m.n_nets == 20 and len(m.kept) == 14
    assert [w.shape[-1] for w in m.weights[0::2]] == [14, 4, 1]
    # the dropped six are the worst by training error
    worst_kept = max(m.train_errors[i] for i in m.kept)
    assert all(m.train_errors[i] >= worst_kept for i in range(20) if i not in m.kept)
    p = m.predict(ds.X)
    assert p.shape == (len(ds),) and np.all(p > 0)


def test_fit_picks_the_better_by_heldout_error(ds):
    model, scores = pick_best(ds.X, ds.y, ds.config_ids, ds.space)
    assert set(scores) == {"mlp-ensemble", "lightgbm"}
    assert model.name == min(scores, key=scores.get)
    assert all(0 < s < 100 for s in scores.values())


def test_evaluate_reports_table2_numbers(ds):
    res = evaluate(ds, models=("lightgbm", "mlp-single"), trials=2)
    assert {"unseen_config_error_pct", "unseen_workload_error_pct", "models", "rafiki_table2"} <= set(res)
    for name in ("lightgbm", "mlp-single"):
        for by in ("config", "workload"):
            t = res["models"][name][by]
            assert 0 < t["error_pct"] < 100 and t["rmse"] > 0 and t["trials"] == 2
    json.dumps(res)


def test_shipped_model_and_search(ds):
    model = Surrogate.load(DEFAULT_MODEL)
    w = Workload(read_ratio=0.9, object_kib=16)
    r = search(model, w, method="nsga2", evaluations=1000, simplified=False)
    assert r.evaluations == 1000 and r.surrogate_calls == 20  # batches of 50
    assert r.predicted_ratio >= r.default_predicted_ratio * 0.999
    c = compare(model, w, ["compaction", "concurrent_reads", "concurrent_writes"], evaluations=600)
    assert c["exhaustive"]["evaluations"] == 4 * 5 * 5
    for m in ("nsga2", "tpe"):
        assert c[m]["vs_exhaustive_pct"] > -15  # Rafiki: within 15% of exhaustive
    d = decide(model, w, Configuration(), r.config, lookahead_s=3600, restart_seconds=ds.median_restart_seconds())
    assert d.reconfigure == (d.benefit_ops > d.cost_ops)


def test_the_shipped_model_predicts_as_the_pickle_it_replaced():
    """The shipped model, converted from the pickle to LightGBM's model file and a JSON, predicts
    the calibration rows as the pickle did (reference computed from the pickle before it went)."""
    reference = json.loads(SHIPPED_PREDICTIONS.read_text())
    ds = Dataset.load(DEFAULT_DATASET)
    assert [r["config_id"] for r in ds.rows] == reference["config_ids"]
    model = Surrogate.load(DEFAULT_MODEL)
    assert isinstance(model, LightGBMSurrogate) and model.heldout_error_pct == pytest.approx(7.1407, abs=1e-4)
    np.testing.assert_allclose(model.predict(ds.X), reference["predictions"], rtol=0, atol=1e-9)
    doc = json.loads(DEFAULT_MODEL.read_text())
    assert doc["format"] == "asgard-tuner-surrogate" and doc["format_version"] == 1 and doc["kind"] == "lightgbm"
    assert doc["library"] == "lightgbm" and doc["library_version"] and doc["weights"] == "model.lgb.txt"
    assert doc["features"] == ds.space.names and doc["knobs"] == list(ds.space.knobs)
    assert doc["knob_space"]["compaction"]["choices"] == ["STCS", "LCS", "TWCS", "UCS"]
    assert set(doc["standardization"]) == {"mu", "sigma", "y_mu", "y_sigma"}


def test_nothing_shipped_is_a_pickle():
    from asgard.tuner.dataset import DATA_DIR

    for f in DATA_DIR.iterdir():
        assert f.suffix not in (".pkl", ".pickle") and f.read_bytes()[:1] != b"\x80", f


@pytest.mark.parametrize("kind", ["lightgbm", "mlp-ensemble", "mlp-single"])
def test_a_model_saved_in_its_librarys_format_predicts_as_before(ds, tmp_path, kind):
    from asgard.tuner.surrogates import make

    model = make(kind, **({} if kind == "lightgbm" else {"epochs": 100})).fit(ds.X, ds.y, ds.space)
    model.heldout_error_pct = 12.5
    path = model.save(tmp_path / "m.json")
    weights = tmp_path / json.loads(path.read_text())["weights"]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["m.json", weights.name])
    if kind == "lightgbm":
        assert weights.name == "m.lgb.txt" and weights.read_text().startswith("tree")
    else:
        assert weights.name == "m.npz"
        np.load(weights, allow_pickle=False)["W0"]  # plain arrays
    loaded = Surrogate.load(path)
    assert type(loaded) is type(model) and loaded.name == model.name and loaded.describe() == model.describe()
    assert loaded.heldout_error_pct == 12.5 and loaded.space == model.space
    np.testing.assert_array_equal(loaded.predict(ds.X), model.predict(ds.X))
    with pytest.raises(ValueError, match=r"\.json"):
        model.save(tmp_path / "m.pkl")


class _Hostile:
    """Unpickling this creates a file: what an attacker's pickle could do."""

    def __init__(self, marker):
        self.marker = str(marker)

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_an_old_pickle_is_refused_with_how_to_refit(tmp_path):
    marker = tmp_path / "unpickled"
    for name in ("model.pkl", "renamed.json"):  # by its suffix, or by pickle's first byte
        old = tmp_path / name
        old.write_bytes(pickle.dumps(_Hostile(marker), protocol=4))
        with pytest.raises(PickledModelError) as err:
            Surrogate.load(old)
        assert isinstance(err.value, ModelFileError) and err.value.path == old
        assert err.value.refit == f"asgard tune fit --out {old.with_suffix('.json')}"
        assert err.value.refit in str(err.value) and "pickle" in str(err.value)
        assert not marker.exists()
    res = CliRunner().invoke(tune, ["recommend", "--model", str(tmp_path / "model.pkl")])
    assert res.exit_code != 0 and "asgard tune fit --out" in res.output and not marker.exists()
    bad = CliRunner().invoke(tune, ["fit", "--out", str(tmp_path / "model.pkl")])
    assert bad.exit_code == 2 and ".json" in bad.output


def test_a_file_that_is_no_model_gets_a_typed_error(tmp_path):
    good = json.loads(DEFAULT_MODEL.read_text())
    (tmp_path / "model.lgb.txt").write_bytes((DEFAULT_MODEL.parent / "model.lgb.txt").read_bytes())
    cases = {
        "not json": "{", "another format": json.dumps({**good, "format": "other"}),
        "a newer version": json.dumps({**good, "format_version": MODEL_FORMAT_VERSION + 1}),
        "an unknown kind": json.dumps({**good, "kind": "xgboost"}),
        "a knob this version lacks": json.dumps({**good, "knobs": [*good["knobs"], "no_such_knob"]}),
        "features that changed": json.dumps({**good, "features": good["features"][:-1]}),
        "derived columns this version computes otherwise": json.dumps(
            {**good, "derived_features": ["log2_object_over_client_chunk"]}),
        "weights outside its folder": json.dumps({**good, "weights": "../model.lgb.txt"}),
        "missing weights": json.dumps({**good, "weights": "absent.lgb.txt"}),
        "a missing field": json.dumps({k: v for k, v in good.items() if k != "standardization"}),
    }
    for why, text in cases.items():
        path = tmp_path / "model.json"
        path.write_text(text)
        with pytest.raises(ModelFormatError) as err:
            Surrogate.load(path)
        assert isinstance(err.value, ModelFileError) and err.value.path == path, why
    path.write_text(json.dumps(good))
    assert isinstance(Surrogate.load(path), LightGBMSurrogate)  # the copy itself is fine
    (tmp_path / "model.lgb.txt").write_text("not a model\n")
    with pytest.raises(ModelFormatError, match="cannot read its weights"):
        Surrogate.load(path)


def test_asgard_tune_recommend_works_from_a_folder_outside_the_repository(tmp_path):
    """As a user runs it: the ``asgard`` command from the environment, in their own folder, the
    repository not on the path (so the project's top-level ``tuner`` does not import there)."""
    asgard = Path(sys.executable).parent / "asgard"
    assert asgard.exists(), f"no asgard command beside {sys.executable}"
    outside = tmp_path / "project"
    outside.mkdir()
    paths = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep)
             if p and Path(p).resolve() != REPO]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    probe = subprocess.run([sys.executable, "-c", "import importlib.util as u; print(u.find_spec('tuner'))"],
                           cwd=outside, env=env, capture_output=True, text=True, timeout=120)
    assert probe.stdout.strip() == "None", probe  # else the test would not notice a model bound to 'tuner'
    res = subprocess.run([str(asgard), "tune", "recommend", "--pattern", "scatter", "--fanout", "8", "--object-kib",
                          "1024", "--compressibility", "0", "--evaluations", "300", "--json", "--out", "tuned.yaml"],
                         cwd=outside, env=env, capture_output=True, text=True, timeout=600)
    assert res.returncode == 0, res.stderr[-3000:]
    doc = json.loads(res.stdout)
    assert doc["evaluations"] == 300 and doc["predicted_ratio"] > 0 and doc["workload"]["pattern"] == "scatter"
    assert (outside / "tuned.yaml").exists()


class _KnownEffects:
    """A surrogate whose every knob's effect is known: durable_writes=false +30%, any other
    memtable_heap_space_mib +2%, any other concurrent_reads +1%, added up."""

    heldout_error_pct = 5.0

    def __init__(self):
        from asgard.tuner.dataset import FeatureSpace

        self.space = FeatureSpace(knobs=("durable_writes", "memtable_heap_space_mib", "concurrent_reads"))
        self.calls = 0
        names = self.space.names
        self.columns = {k: [names.index(f) for f in KNOBS[k].feature_names()] for k in self.space.knobs}
        self.effects = {"durable_writes": 0.30, "memtable_heap_space_mib": 0.02, "concurrent_reads": 0.01}

    def predict(self, X):
        self.calls += 1
        default = self.space.matrix(Workload.from_dag("scatter", 8, 1024), [Configuration()])[0]
        return np.array([1.0 + sum(e for k, e in self.effects.items()
                                   if not np.array_equal(x[self.columns[k]], default[self.columns[k]]))
                         for x in X])


def test_search_leaves_knobs_whose_effect_is_within_the_model_error_at_their_defaults():
    """The search moves every knob that helps at all; its pick keeps only those the model can
    tell from its own error (5% here): the 30% knob stays, the 2% and 1% ones go back."""
    model = _KnownEffects()
    w = Workload.from_dag("scatter", 8, 1024)
    raw = search(model, w, method="nsga2", evaluations=1500, simplified=False)
    assert set(raw.config.non_default()) == {"durable_writes", "memtable_heap_space_mib", "concurrent_reads"}
    picked = search(model, w, method="nsga2", evaluations=1500)
    assert picked.config.non_default() == {"durable_writes": False}
    assert sorted(picked.dropped) == ["concurrent_reads", "memtable_heap_space_mib"]
    assert picked.predicted_ratio == pytest.approx(1.30) and raw.predicted_ratio == pytest.approx(1.33)
    # a model that claims no error keeps everything that helps; one that errs 40% keeps nothing
    model.heldout_error_pct = 0.0
    assert search(model, w, method="nsga2", evaluations=1500).config == raw.config
    model.heldout_error_pct = 40.0
    assert search(model, w, method="nsga2", evaluations=1500).config == Configuration()


def _crossed_rows(effect, seed=0):
    """Calibration rows of durable_writes x client_chunk_kib over three workloads, two pairs each,
    with a known effect per combination and 3% noise per pair."""
    rng = np.random.default_rng(seed)
    rows = []
    for w in ("scatter8-1024k-c0", "broadcast8-1024k-c0", "shuffle4-256k-c0"):
        for _ in range(2):
            rows.append({"tag": "aa", "knobs": {}, "workload": {"name": w},
                         "ratios": list(np.exp(rng.normal(0, 0.03, 2)))})
        for durable in (True, False):
            for chunk in (256, 512, 1024, 2048, 4096):
                if (durable, chunk) == (True, 1024):
                    continue
                tag = ("oat:client_chunk_kib" if durable else "oat:durable_writes" if chunk == 1024
                       else "cross:durable_writes*client_chunk_kib")
                if durable and chunk in (512, 2048):
                    tag = "cross:durable_writes*client_chunk_kib"
                mean = effect(durable, chunk)
                rows.append({"tag": tag, "knobs": {"durable_writes": durable, "client_chunk_kib": chunk},
                             "workload": {"name": w}, "ratios": list(mean * np.exp(rng.normal(0, 0.03, 2)))})
    return rows


def test_an_effect_that_needs_both_knobs_moved_makes_both_key():
    """Chunk size alone does nothing; without the commit log, 2 MiB chunks add 20%: the
    interaction is significant and client_chunk_kib becomes a key knob. Two knobs that only add
    up show no interaction."""
    from asgard.tuner.anova import interaction

    together = _crossed_rows(lambda d, c: (1.0 if d else 1.25) * (1.2 if (not d and c >= 2048) else 1.0))
    result = rank(together)
    (found,) = result["interactions"]
    assert found["knobs"] == ["durable_writes", "client_chunk_kib"] and found["significant"]
    assert {"durable_writes", "client_chunk_kib"} <= set(result["key_knobs"])
    cell = found["per_workload_pct"]["scatter8-1024k-c0"]
    assert cell["durable_writes=False, client_chunk_kib=2048"] > cell["durable_writes=False, client_chunk_kib=1024"] + 10
    # the test's size and power over repeated calibrations: knobs whose effects only multiply are
    # called interacting about as often as alpha says; the effect above is found every time
    additive = [interaction(_crossed_rows(lambda d, c: (1.0 if d else 1.25) * (1.0 + 0.05 * (c > 1024)), seed),
                            "durable_writes", "client_chunk_kib")["significant"] for seed in range(40)]
    assert sum(additive) <= 6  # 5% of 40 is 2; binomial(40, 0.05) exceeds 6 once in 700
    assert all(interaction(_crossed_rows(lambda d, c: (1.0 if d else 1.25) * (1.2 if (not d and c >= 2048) else 1.0),
                                         seed), "durable_writes", "client_chunk_kib")["significant"]
               for seed in range(1, 11))


def test_rank_on_shipped_data():
    res = rank(read_rows(DEFAULT_DATASET))
    assert 1 <= res["k"] <= len(res["ranking"]) and res["key_knobs"]
    significant = [t for t in res["ranking"] if t["significant"]]
    assert res["ranking"][: len(significant)] == significant and all(t["p_value"] < 0.05 for t in significant)
    stds = [t["std_pct"] for t in significant]
    assert stds == sorted(stds, reverse=True) and res["noise_std_pct"] > 0
    assert set(res["key_knobs"]) <= {t["knob"] for t in significant}
    # the commit log is what ephemeral data need not pay for: durable_writes matters
    assert "durable_writes" in res["key_knobs"]
    assert next(t for t in res["ranking"] if t["knob"] == "durable_writes")["levels"]["False"] > 0
    assert knee([100, 90, 10, 9, 8], min_k=1, max_k=4) == 2
    shipped = json.loads(DEFAULT_RANKING.read_text())
    assert shipped["key_knobs"]


def test_cli_recommend_writes_a_config_the_node_accepts(tmp_path):
    out = tmp_path / "tuned.yaml"
    runner = CliRunner()
    res = runner.invoke(tune, ["recommend", "--read-ratio", "0.9", "--object-kib", "16", "--json",
                               "--evaluations", "500", "--out", str(out)])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert doc["predicted_ratio"] > 0 and doc["evaluations"] == 500 and "yaml_overrides" in doc
    cfg = load_config_file(out)
    assert isinstance(cfg, Configuration)
    file_doc = yaml.safe_load(out.read_text())
    assert set(file_doc) >= {"knobs", "yaml_overrides", "table_options", "live", "keyspace", "client"}
    assert file_doc["client"] == cfg.client_options()
    from asgard_dagster import CassandraIOManager, CassandraResource

    # the client side, as the IO manager's fields and its nested connection's durable_writes
    own = {k: v for k, v in file_doc["io_manager"].items() if k != "cassandra"}
    io = CassandraIOManager(**own, cassandra=CassandraResource(**file_doc["io_manager"]["cassandra"]))
    assert io.concurrency == cfg["client_in_flight"] and io.chunk_size_bytes == cfg["client_chunk_kib"] * 1024
    assert io.connection().durable_writes == cfg["durable_writes"]
    from asgard.tuner.node import TunerNode

    node = TunerNode(index=5, workdir=tmp_path / "n")
    node.set_overrides(file_doc["yaml_overrides"], replace=True)
    rendered = node.config()
    assert rendered["cluster_name"] == "asgard-tuner-5" and rendered["seed_provider"]
    for key, value in file_doc["yaml_overrides"].items():
        assert rendered.get(key) == value if value is not None else key not in rendered or key == "concurrent_compactors"
    # bad input is refused clearly
    bad = runner.invoke(tune, ["recommend", "--read-ratio", "1.5"])
    assert bad.exit_code != 0 and "1.5" in bad.output
    ev = runner.invoke(tune, ["evaluate", "--json", "--trials", "1", "--model", "lightgbm"])
    assert ev.exit_code == 0, ev.output
    assert json.loads(ev.output)["unseen_config_error_pct"] > 0


def test_the_replicate_run_measured_the_same_plan_and_its_pairs_are_pooled(ds):
    from asgard.tuner.dataset import REPLICATE_DATASET, default_datasets, pool_replicates

    assert default_datasets() == [DEFAULT_DATASET, REPLICATE_DATASET]
    first, second = read_rows(DEFAULT_DATASET), read_rows(REPLICATE_DATASET)
    measured = lambda rows: {(r["run_slot"], r["workload"]["name"]): r["knobs"] for r in rows}
    assert measured(second) == measured(first)  # the same configurations on the same workloads
    assert len(ds) == len(first)
    for r in ds.rows:  # each label: both runs' pairs, each run's own ratio kept beside
        assert len(r["replicate_ratios"]) == 2 and len(r["ratios"]) == 4
    res = evaluate(ds, models=("lightgbm",), trials=1)
    assert res["replicates"] == 2 and res["retest_error_pct"] > 0
    # a replicate of another plan is refused, not averaged into rows it does not measure
    other = [dict(first[0], knobs={**first[0]["knobs"], "durable_writes": not first[0]["knobs"]["durable_writes"]})]
    with pytest.raises(ValueError, match="same knobs, --random and --seed"):
        pool_replicates([first[:1], other])


def test_the_seen_levels_holdout_never_asks_for_a_knob_level_training_lacks(ds):
    from asgard.tuner.evaluate import seen_levels_split

    # the levels only one configuration has (one-at-a-time extremes no random configuration reached)
    having: dict[tuple, set] = {}
    for r in ds.rows:
        for k in ds.space.knobs:
            having.setdefault((k, repr(r["knobs"][k])), set()).add(r["config_id"])
    alone = {next(iter(c)) for c in having.values() if len(c) == 1}
    assert alone  # the design has them: the split must work around them
    for seed in range(5):
        train, test = seen_levels_split(ds, 0.25, np.random.default_rng(seed))
        assert test.any() and train.any() and not (train & test).any()
        seen = {(k, repr(r["knobs"][k])) for r, t in zip(ds.rows, train) if t for k in ds.space.knobs}
        for r, held in zip(ds.rows, test):
            if held:
                assert {(k, repr(r["knobs"][k])) for k in ds.space.knobs} <= seen, r["config_id"]
        # every configuration's rows are on one side (a configuration is held out whole)
        sides = {}
        for cid, held in zip(ds.config_ids, test):
            assert sides.setdefault(cid, held) == held
        assert not alone & set(ds.config_ids[test])


def test_the_knob_x_workload_columns_are_the_workload_and_configuration_s(ds):
    """FeatureSpace.interactions reads the knob values and the workload back out of the vector; a
    knob the space lacks is at its default."""
    from asgard.tuner.dataset import FeatureSpace

    w = Workload.from_dag("shuffle", 8, 1024, compressibility=0.25)
    c = Configuration({"client_chunk_kib": 256, "chunk_length_kib": 64, "client_in_flight": 2,
                       "client_codec": "zstd", "durable_writes": False, "concurrent_reads": 64})
    for space in (ds.space, FeatureSpace(("durable_writes", "concurrent_reads"))):
        got = dict(zip(space.interaction_names, space.interactions(space.matrix(w, [c]))[0]))
        assert got["log2_object_over_client_chunk"] == pytest.approx(2.0 if "client_chunk_kib" in space.knobs else 0.0)
        assert got["durable_writes_off*log2_kib_written_a_round"] == pytest.approx(np.log2(1024 * 4 * 8))
        assert got["concurrent_reads*log2_object_kib"] == pytest.approx(np.log1p(64) * 10)
        if "client_codec" in space.knobs:
            assert got["log2_object_over_chunk_length"] == pytest.approx(4.0)
            assert got["log2_chunks_in_flight"] == pytest.approx(1.0)  # 4 chunks, 2 in flight
            assert got["client_codec_on*compressibility"] == pytest.approx(0.25)
        else:  # the defaults: 1 MiB client chunks, 16 KiB table chunks, 8 in flight, no codec
            assert got["log2_object_over_chunk_length"] == pytest.approx(6.0)
            assert got["log2_chunks_in_flight"] == pytest.approx(0.0) and got["client_codec_on*compressibility"] == 0
            assert "client_chunk_kib*log2_object_kib" not in got


def test_a_lightgbm_model_saves_its_derived_columns_and_the_shipped_one_has_none(ds, tmp_path):
    model = LightGBMSurrogate().fit(ds.X, ds.y, ds.space)
    assert model.interactions and model.derived_features == ds.space.interaction_names
    assert model.booster.num_feature() == len(ds.space.names) + len(ds.space.interaction_names)
    doc = json.loads(model.save(tmp_path / "m.json").read_text())
    assert doc["format_version"] == MODEL_FORMAT_VERSION and doc["derived_features"] == ds.space.interaction_names
    assert doc["hyperparameters"]["interactions"] is True and doc["features"] == ds.space.names
    plain = LightGBMSurrogate(interactions=False).fit(ds.X, ds.y, ds.space)
    assert plain.derived_features == [] and plain.booster.num_feature() == len(ds.space.names)
    shipped = Surrogate.load(DEFAULT_MODEL)  # format 1: saved before the derived columns
    assert json.loads(DEFAULT_MODEL.read_text())["format_version"] == 1
    assert not shipped.interactions and shipped.derived_features == []
