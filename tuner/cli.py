"""``tune`` command group (mounted by the project as ``asgard tune ...``).

    tune calibrate   measure workloads x configurations on the tuner's own node (127.0.0.5)
    tune rank        ANOVA key-knob ranking of the dataset
    tune fit         fit the surrogates, keep the better by held-out error
    tune evaluate    Rafiki Table 2: error on unseen configurations / workloads
    tune recommend   search the surrogate for the best configuration of a workload
    tune validate    measure recommended vs default on the real node
"""
from __future__ import annotations

import json
import sys
from pathlib import Path

import click

from .calibrate import DESIGNS
from .dataset import DEFAULT_DATASET, DEFAULT_MODEL, DEFAULT_RANKING, default_datasets

DEFAULT_VALIDATION = DEFAULT_DATASET.parent / "validation.json"


def _echo_json(obj) -> None:
    click.echo(json.dumps(obj, indent=2, default=str))


@click.group(name="tune")
def tune() -> None:
    """Tune Cassandra for the workload a DAG produces (Rafiki, Middleware 2017)."""


@tune.command()
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_DATASET), show_default=True)
@click.option("--index", default=5, show_default=True, help="the tuner's node: 127.0.0.<index>")
@click.option("--heap", default="2G", show_default=True)
@click.option("--duration", default=1.0, show_default=True, help="seconds measured per workload and side of a pair")
@click.option("--pairs", default=2, show_default=True, help="ABBA pairs per configuration")
@click.option("--random", "n_random", default=14, show_default=True, help="random configurations (no-restart knobs)")
@click.option("--seed", default=0, show_default=True)
@click.option("--workloads", "workload_spec", default=None,
              help="pattern:fanout:KiB:compressibility,... or a grid's name: dag (the default, "
                   "asgard.tuner.workload.DAG_WORKLOADS: six shapes), wide (twelve), gaps (twelve in wide's gaps) "
                   "or dense (wide and gaps)")
@click.option("--design", type=click.Choice(DESIGNS), default="grid", show_default=True,
              help="grid: one knob at a time, the crossed pairs and --random random configurations; random: the "
                   "random ones alone (Rafiki's sampling)")
@click.option("--keep-running", is_flag=True, help="leave the node up afterwards")
def calibrate(out, index, heap, duration, pairs, n_random, seed, workload_spec, design, keep_running):
    """Measure every planned configuration against the default, paired (resumable)."""
    from .calibrate import run_calibration
    from .workload import dag_workloads

    wls = dag_workloads(_parse_workloads(workload_spec)) if workload_spec else dag_workloads()
    summary = run_calibration(out, index=index, heap=heap, duration_s=duration, pairs=pairs, n_random=n_random,
                              seed=seed, workloads=wls, stop_after=not keep_running, design=design)
    _echo_json(summary)


def _parse_workloads(spec: str) -> list[tuple]:
    from .workload import WORKLOAD_GRIDS

    if spec in WORKLOAD_GRIDS:
        return list(WORKLOAD_GRIDS[spec])
    out = []
    for item in spec.split(","):
        try:
            pattern, fanout, kib, comp = item.split(":")
            out.append((pattern, int(fanout), int(kib), float(comp)))
        except ValueError:
            raise click.BadParameter(f"{item!r}: expected pattern:fanout:KiB:compressibility, "
                                     f"e.g. scatter:8:1024:0, or one of {sorted(WORKLOAD_GRIDS)}") from None
    return out


#: the calibration runs a command reads: several runs of one plan are pooled (rank: side by side)
_data_option = click.option(
    "--data", "data", multiple=True, type=click.Path(exists=True, dir_okay=False),
    help="Calibration run(s) (JSONL); several runs of one plan are pooled. Default: the shipped dataset and its "
    "replicate.")


@tune.command()
@_data_option
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_RANKING), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def rank(data, out, as_json):
    """ANOVA ranking of the knobs; the knee picks the key knobs."""
    from .anova import rank as do_rank
    from .calibrate import read_rows

    # every pair is an observation: the runs' rows side by side are replication for the ANOVA
    result = do_rank([r for path in (data or default_datasets()) for r in read_rows(path)])
    Path(out).write_text(json.dumps(result, indent=2))
    if as_json:
        _echo_json(result)
        return
    click.echo(f"{'knob':<28}{'std % of default':>18}{'F':>9}{'p':>10}  levels (% over default, mean of workloads)")
    for t in result["ranking"]:
        mark = "*" if t["knob"] in result["key_knobs"] else " "
        levels = ", ".join(f"{lv} {v:+.1f}" for lv, v in t["levels"].items())
        click.echo(f"{mark}{t['knob']:<27}{t['std_pct']:>18.2f}{t['F']:>9.2f}{t['p_value']:>10.3g}  {levels}")
    for i in result["interactions"]:
        mark = "*" if i["significant"] else " "
        click.echo(f"{mark}{' x '.join(i['knobs']):<27}{'(together)':>18}{i['F']:>9.2f}{i['p_value']:>10.3g}  "
                   "interaction: the effect of one depends on the other")
    click.echo(f"key knobs (significant, knee k={result['k']}; and both of a significant interaction): "
               f"{', '.join(result['key_knobs'])}; noise of one pair's ratio (default against itself) {result['noise_std_pct']:.2f}% "
               f"over {result['noise_pairs']} pairs")


def _json_out(ctx, param, value):
    if value is not None and Path(value).suffix.lower() != ".json":
        raise click.BadParameter(f"{value}: a model is saved as a .json file, its weights beside it (e.g. model.json)")
    return value


def _load_model(model_path):
    """The surrogate at ``model_path``; a file that is no model this version reads is a usage error."""
    from .surrogates import ModelFileError, Surrogate

    try:
        return Surrogate.load(model_path)
    except ModelFileError as exc:
        raise click.ClickException(str(exc)) from None


@tune.command()
@_data_option
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_MODEL), show_default=True,
              callback=_json_out,
              help="the model's JSON file; its weights go beside it (LightGBM's model file or the nets' .npz)")
@click.option("--model", "models", multiple=True, default=("mlp-ensemble", "lightgbm"), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def fit(data, out, models, as_json):
    """Fit the surrogates; keep the one with the lower held-out error."""
    from .dataset import Dataset
    from .surrogates import pick_best

    ds = Dataset.load(list(data) or None)
    with _spinner("fitting surrogates"):
        model, scores = pick_best(ds.X, ds.y, ds.config_ids, ds.space, candidates=models)
    model.save(out)
    result = {"chosen": model.name, "heldout_error_pct": {k: round(v, 2) for k, v in scores.items()},
              "rows": len(ds), "features": ds.space.names, "model": model.describe(), "saved": out}
    if as_json:
        _echo_json(result)
    else:
        click.echo(f"chosen {model.name}; held-out error %: {result['heldout_error_pct']}; saved {out}")


@tune.command()
@_data_option
@click.option("--trials", default=10, show_default=True)
@click.option("--model", "models", multiple=True, default=("mlp-ensemble", "mlp-single", "lightgbm"), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def evaluate(data, trials, models, as_json):
    """Prediction error on unseen configurations and unseen workloads (Rafiki Table 2)."""
    from .dataset import Dataset
    from .evaluate import evaluate as do_evaluate, table2_text

    ds = Dataset.load(list(data) or None)
    result = do_evaluate(ds, models, trials=trials, progress=not as_json)
    if as_json:
        _echo_json(result)
    else:
        click.echo(table2_text(result))
        click.echo(f"best: {result['best_model']}: unseen configs {result['unseen_config_error_pct']}%, "
                   f"unseen workloads {result['unseen_workload_error_pct']}% (error of the paired ratio over the "
                   f"default; predicting 'no change' errs {result['no_model_error_pct']}%, the default against "
                   f"itself {result['noise_error_pct']}%)")
        seen = result["models"][result["best_model"]]["config_seen_levels"]
        click.echo(f"held-out configurations at knob levels training has seen (Rafiki's random sample; "
                   f"{seen['held_out_groups']} of {result['configurations']} held out): "
                   f"{result['unseen_config_seen_levels_error_pct']}% (predicting 'no change' for them errs "
                   f"{seen['no_model_error_pct']}%)")
        if result.get("retest_error_pct") is not None:
            click.echo(f"{result['replicates']} calibration runs pooled: one run's measurement of a configuration "
                       f"and workload lands {result['retest_error_pct']}% from the other's")


@tune.command()
@click.option("--read-ratio", type=click.FloatRange(0, 1), default=0.5, show_default=True,
              help="reads per operation (mixed pattern; a DAG pattern sets its own)")
@click.option("--object-kib", default=64, show_default=True, type=click.IntRange(1))
@click.option("--pattern", default="mixed", show_default=True,
              type=click.Choice(["mixed", "scatter", "broadcast", "fanin", "shuffle"]))
@click.option("--fanout", default=8, show_default=True, type=click.IntRange(1))
@click.option("--compressibility", default=0.5, show_default=True, type=click.FloatRange(0, 1),
              help="share of the outputs' bytes that compress (0: video, arrays; 1: text)")
@click.option("--method", default="nsga2", show_default=True, type=click.Choice(["nsga2", "tpe", "exhaustive"]))
@click.option("--evaluations", default=3500, show_default=True)
@click.option("--knobs", "knob_set", default="key", show_default=True, type=click.Choice(["key", "all"]),
              help="search the ANOVA key knobs (others default) or every calibrated knob")
@click.option("--compare", "do_compare", is_flag=True, help="also run the other methods and exhaustive search")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_MODEL), show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write the config file (YAML)")
@click.option("--json", "as_json", is_flag=True)
def recommend(read_ratio, object_kib, pattern, fanout, compressibility, method, evaluations, knob_set, do_compare, model_path, out,
              as_json):
    """Best configuration for a workload, by searching the fitted surrogate."""
    from .search import compare, search, write_config_file
    from .workload import Workload

    model = _load_model(model_path)
    if pattern == "mixed":
        w = Workload(read_ratio=min(read_ratio, 0.99), object_kib=object_kib, fanout=fanout,
                     compressibility=compressibility)
    else:
        w = Workload.from_dag(pattern, fanout, object_kib, compressibility=compressibility)
    from .anova import key_knobs

    knobs = key_knobs(model) if knob_set == "key" else list(model.space.knobs)
    result = search(model, w, knobs, method, evaluations)
    doc = {"workload": w.as_dict(), **result.as_dict(), **result.config.to_file_dict()}
    if do_compare:
        doc["compare"] = compare(model, w, knobs, evaluations)
    if out:
        write_config_file(out, result, w)
        doc["written"] = out
    if as_json:
        _echo_json(doc)
        return
    click.echo(f"workload {w.name}: {method} searched {result.evaluations} configurations in "
               f"{result.seconds:.2f}s ({result.surrogate_calls} batched surrogate calls)")
    click.echo(f"predicted {result.predicted_ratio:.3f}x the stock default (default itself {result.default_predicted_ratio:.3f}x) "
               f"({result.predicted_gain_pct:+.1f}%)")
    for k, v in result.config.non_default().items():
        click.echo(f"  {k} = {v}")
    if result.dropped:
        click.echo(f"  left at their defaults (within the model's error of the search's pick): {', '.join(result.dropped)}")
    if do_compare:
        c = doc["compare"]
        for m in ("nsga2", "tpe"):
            click.echo(f"{m}: {c[m]['seconds']}s, {c[m]['evaluations']} evals, {c[m]['vs_exhaustive_pct']:+.2f}% vs exhaustive "
                       f"({c['exhaustive']['evaluations']} configs in {c['exhaustive']['seconds']}s)")
    if out:
        click.echo(f"wrote {out}")


@tune.command()
@click.option("--index", default=5, show_default=True, help="the tuner's node: 127.0.0.<index> (started if down)")
@click.option("--workloads", "workload_spec", default=None,
              help="pattern:fanout:KiB:compressibility,... or a grid's name, dag, wide, gaps or dense "
                   "(default: scatter, broadcast, shuffle at the bench's sizes)")
@click.option("--pairs", default=4, show_default=True, help="ABBA pairs of default and tuned per workload")
@click.option("--duration", default=1.5, show_default=True, help="seconds per side of a pair")
@click.option("--noise/--no-noise", default=True, show_default=True,
              help="also measure the default against itself: the noise floor beside each gain")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_MODEL))
@click.option("--keyspace", default="asgard_tuner", show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_VALIDATION), show_default=True)
@click.option("--json", "as_json", is_flag=True, help="print the rows as JSON")
def validate(index, workload_spec, pairs, duration, noise, model_path, keyspace, out, as_json):
    """Measure the tuned configuration against the default on the real node, per DAG pattern."""
    from asgard.resources.stores.cql import CassandraObjectStore

    from .node import TunerNode
    from .validate import VALIDATION_WORKLOADS, validate as do_validate
    from .workload import dag_workloads

    wls = dag_workloads(_parse_workloads(workload_spec) if workload_spec else VALIDATION_WORKLOADS)
    _load_model(model_path)  # a model this version cannot read fails before the node starts
    node = TunerNode(index=index)
    started = not node.is_running()
    if started:
        node.start()
    try:
        store = CassandraObjectStore(**node.client_options(), keyspace=keyspace)
        store.ping()
        result = do_validate(wls, model_path, node, store, pairs=pairs, duration_s=duration, noise=noise,
                             progress=not as_json)
    finally:
        if started:
            node.stop()
    Path(out).write_text(json.dumps(result, indent=2))
    if as_json:
        _echo_json(result["rows"])
        return
    rafiki = "Rafiki, tuned over default: +41% read-heavy, +35% mixed, +14% write-heavy (Rafiki, Middleware'17, Fig. 4)"
    click.echo(f"{len(result['rows'])} workloads, {pairs} pairs x {duration}s a side, 95% intervals; {rafiki}")


class _spinner:
    def __init__(self, text: str):
        self.text = text
        self.status = None

    def __enter__(self):
        if sys.stderr.isatty():
            from rich.console import Console

            self.status = Console(stderr=True).status(self.text)
            self.status.start()
        return self

    def __exit__(self, *exc):
        if self.status:
            self.status.stop()


main = tune

if __name__ == "__main__":
    tune()
