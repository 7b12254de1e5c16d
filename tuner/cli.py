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

from .dataset import DEFAULT_DATASET, DEFAULT_MODEL, DEFAULT_RANKING

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
@click.option("--duration", default=2.0, show_default=True, help="seconds measured per workload")
@click.option("--random", "n_random", default=14, show_default=True, help="random configurations")
@click.option("--seed", default=0, show_default=True)
@click.option("--read-ratios", default="0.1,0.3,0.5,0.7,0.9", show_default=True)
@click.option("--object-kib", default="16,1024", show_default=True)
@click.option("--keep-running", is_flag=True, help="leave the node up afterwards")
def calibrate(out, index, heap, duration, n_random, seed, read_ratios, object_kib, keep_running):
    """Measure the workload grid under sampled configurations (resumable)."""
    from .calibrate import run_calibration
    from .workload import standard_workloads

    wls = standard_workloads(tuple(float(x) for x in read_ratios.split(",")),
                             tuple(int(x) for x in object_kib.split(",")))
    summary = run_calibration(out, index=index, heap=heap, duration_s=duration, n_random=n_random, seed=seed,
                              workloads=wls, stop_after=not keep_running)
    _echo_json(summary)


@tune.command()
@click.option("--data", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_DATASET), show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_RANKING), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def rank(data, out, as_json):
    """ANOVA ranking of the knobs; the knee picks the key knobs."""
    from .anova import rank as do_rank
    from .calibrate import read_rows

    result = do_rank(read_rows(data))
    Path(out).write_text(json.dumps(result, indent=2))
    if as_json:
        _echo_json(result)
        return
    click.echo(f"{'knob':<28}{'std % of default':>18}{'F':>9}{'p':>10}  best level")
    for i, t in enumerate(result["ranking"]):
        mark = "*" if i < result["k"] else " "
        click.echo(f"{mark}{t['knob']:<27}{t['std_pct']:>18.2f}{t['F']:>9.2f}{t['p_value']:>10.3g}  {t['best_level']}")
    click.echo(f"key knobs (knee k={result['k']}): {', '.join(result['key_knobs'])}; "
               f"noise (repeated default) {result['noise_std_pct']:.2f}%")


@tune.command()
@click.option("--data", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_DATASET), show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_MODEL), show_default=True)
@click.option("--model", "models", multiple=True, default=("mlp-ensemble", "lightgbm"), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def fit(data, out, models, as_json):
    """Fit the surrogates; keep the one with the lower held-out error."""
    from .dataset import Dataset
    from .surrogates import pick_best

    ds = Dataset.load(data)
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
@click.option("--data", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_DATASET), show_default=True)
@click.option("--trials", default=10, show_default=True)
@click.option("--model", "models", multiple=True, default=("mlp-ensemble", "mlp-single", "lightgbm"), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def evaluate(data, trials, models, as_json):
    """Prediction error on unseen configurations and unseen workloads (Rafiki Table 2)."""
    from .dataset import Dataset
    from .evaluate import evaluate as do_evaluate, table2_text

    ds = Dataset.load(data)
    result = do_evaluate(ds, models, trials=trials, progress=not as_json)
    if as_json:
        _echo_json(result)
    else:
        click.echo(table2_text(result))
        click.echo(f"best: {result['best_model']}: unseen configs {result['unseen_config_error_pct']}%, "
                   f"unseen workloads {result['unseen_workload_error_pct']}%")


@tune.command()
@click.option("--read-ratio", type=click.FloatRange(0, 1), required=True)
@click.option("--object-kib", default=64, show_default=True, type=click.IntRange(1))
@click.option("--pattern", default="mixed", show_default=True,
              type=click.Choice(["mixed", "scatter", "broadcast", "fanin", "shuffle"]))
@click.option("--fanout", default=8, show_default=True, type=click.IntRange(1))
@click.option("--method", default="nsga2", show_default=True, type=click.Choice(["nsga2", "tpe", "exhaustive"]))
@click.option("--evaluations", default=3500, show_default=True)
@click.option("--knobs", "knob_set", default="key", show_default=True, type=click.Choice(["key", "all"]),
              help="search the ANOVA key knobs (others default) or every calibrated knob")
@click.option("--compare", "do_compare", is_flag=True, help="also run the other methods and exhaustive search")
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_MODEL), show_default=True)
@click.option("--out", type=click.Path(dir_okay=False), default=None, help="write the config file (YAML)")
@click.option("--json", "as_json", is_flag=True)
def recommend(read_ratio, object_kib, pattern, fanout, method, evaluations, knob_set, do_compare, model_path, out,
              as_json):
    """Best configuration for a workload, by searching the fitted surrogate."""
    from .search import compare, search, write_config_file
    from .surrogates import Surrogate
    from .workload import Workload

    model = Surrogate.load(model_path)
    if pattern == "mixed":
        w = Workload(read_ratio=min(read_ratio, 0.99), object_kib=object_kib, fanout=fanout)
    else:
        w = Workload.from_dag(pattern, fanout, object_kib)
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
    click.echo(f"predicted {result.predicted_ops_per_s:.0f} op/s vs default {result.default_predicted_ops_per_s:.0f} "
               f"({result.predicted_gain_pct:+.1f}%)")
    for k, v in result.config.non_default().items():
        click.echo(f"  {k} = {v}")
    if do_compare:
        c = doc["compare"]
        for m in ("nsga2", "tpe"):
            click.echo(f"{m}: {c[m]['seconds']}s, {c[m]['evaluations']} evals, {c[m]['vs_exhaustive_pct']:+.2f}% vs exhaustive "
                       f"({c['exhaustive']['evaluations']} configs in {c['exhaustive']['seconds']}s)")
    if out:
        click.echo(f"wrote {out}")


@tune.command()
@click.option("--index", default=5, show_default=True)
@click.option("--read-ratios", default="0.9,0.5,0.1", show_default=True)
@click.option("--object-kib", default=16, show_default=True)
@click.option("--duration", default=4.0, show_default=True)
@click.option("--repeats", default=2, show_default=True)
@click.option("--model", "model_path", type=click.Path(exists=True, dir_okay=False), default=str(DEFAULT_MODEL))
@click.option("--knobs", "knob_set", default="key", show_default=True, type=click.Choice(["key", "all"]))
@click.option("--real-grid", default=0, show_default=True,
              help="also measure every min/default/max combination of the top N key knobs on the node")
@click.option("--out", type=click.Path(dir_okay=False), default=str(DEFAULT_VALIDATION), show_default=True)
@click.option("--json", "as_json", is_flag=True)
def validate(index, read_ratios, object_kib, duration, repeats, model_path, knob_set, real_grid, out, as_json):
    """Measure the recommended configuration against the default on the real node."""
    from .surrogates import Surrogate
    from .validate import validate as do_validate

    model = Surrogate.load(model_path)
    from .anova import key_knobs

    knobs = key_knobs(model) if knob_set == "key" else list(model.space.knobs)
    result = do_validate([float(x) for x in read_ratios.split(",")], object_kib, duration, repeats,
                         model_path, index=index, knobs=knobs, real_grid=real_grid)
    Path(out).write_text(json.dumps(result, indent=2))
    if as_json:
        _echo_json(result)
        return
    rafiki = {0.9: "+41%", 0.5: "+35%", 0.1: "+14%"}  # seed 004: read-heavy, mixed, write-heavy
    for r in result["workloads"]:
        line = (f"{r['workload']:<24} default {r['default_ops_per_s']:>8.0f}  tuned {r['tuned_ops_per_s']:>8.0f}  "
                f"{r['gain_pct']:+6.1f}%  (predicted {r['predicted_gain_pct']:+.1f}%; Rafiki {rafiki.get(r['read_ratio'], '-')})")
        if "real_grid" in r:
            g = r["real_grid"]
            line += (f"; real grid of {g['configs']}: best {g['best']} {g['best_gain_pct']:+.1f}% over default, "
                     f"tuned {g['tuned_vs_best_pct']:+.1f}% vs it")
        click.echo(line)


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
