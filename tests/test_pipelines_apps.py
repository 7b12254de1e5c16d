"""The paper's three applications end to end as Dagster jobs, at small scale, on the
multiprocess executor (reconstructed in each step's process) with a given IO manager.

Each ``check_*`` helper takes a backend name (see :func:`asgard.pipelines.backends.io_manager_for`),
so the same checks can run on every backend.
"""
import collections

import numpy as np
import pytest

from asgard.pipelines import data, jobs, word_count
from asgard.pipelines.backends import BACKENDS


def run_small(app: str, backend: str, **overrides) -> tuple[jobs.AppRun, dict]:
    cfg = {**jobs.SMALL[app], **overrides}
    run = jobs.run_app(app, backend, **cfg)
    assert run.success, f"{app} on {backend} failed (run {run.run_id})"
    assert run.result is not None and run.result["app"] == app
    return run, cfg


def writes_of(run: jobs.AppRun, step_prefix: str, output: str) -> int:
    return sum(1 for step, out in run.writes if step.startswith(step_prefix) and out == output)


def reads_of(run: jobs.AppRun, upstream_step: str, upstream_output: str) -> list[str]:
    return [step for step, _, up, up_out in run.reads if up == upstream_step and up_out == upstream_output]


def check_word_count(backend: str) -> None:
    run, cfg = run_small("word_count", backend)
    m, r = cfg["fanout"], cfg["reducers"]
    expected: collections.Counter = collections.Counter()
    for rel in data.stdlib_corpus(cfg["scale"]):
        expected.update(word_count.tokenize((data.stdlib_root() / rel).read_bytes().decode("utf-8", errors="replace")))
    res = run.result
    assert len(expected) > 1000 and sum(expected.values()) > 50_000  # a real corpus, not a toy
    assert res["counts"] == dict(expected)
    assert res["n_words"] == sum(expected.values()) and res["n_distinct"] == len(expected)
    assert res["n_mappers"] == m and res["n_reducers"] == r
    assert res["top"][0][1] == expected.most_common(1)[0][1]
    # the shuffle: m x r partitions written, each reducer reads one partition of every mapper
    assert writes_of(run, "map_words[", "part_0") == m
    assert sum(writes_of(run, "map_words[", f"part_{j}") for j in range(r)) == m * r
    for j in range(r):
        readers = {step for step, _, up, up_out in run.reads if up_out == f"part_{j}"}
        assert readers == {f"reduce_bucket_{j}"}
        assert len([1 for step, _, up, up_out in run.reads if up_out == f"part_{j}"]) == m
    assert not any(step.startswith(f"reduce_bucket_{r}") for step in run.step_seconds)  # skipped


def check_lightgbm_forest(backend: str) -> None:
    run, cfg = run_small("lightgbm_forest", backend)
    k = cfg["fanout"]
    res = run.result
    assert res["n_trainers"] == k and len(res["member_accuracy"]) == k
    assert res["accuracy"] > 0.9, res
    assert res["accuracy_original"] > 0.9, res  # the unaugmented digits test split
    assert res["n_test_original"] == 450  # 25% of sklearn's 1,797 digits
    seeds = {m["seed"] for m in res["members"]}
    assert len(seeds) == k  # every trainer its own random 90/10 split
    # the broadcast: the PCA output is written once and read by each of the k trainers
    assert writes_of(run, "pca", "pca_train") == 1
    readers = reads_of(run, "pca", "pca_train")
    assert len(readers) == k and all(s.startswith("train_booster[") for s in readers)


def check_video_analytics(backend: str) -> None:
    run, cfg = run_small("video_analytics", backend)
    n = cfg["fanout"]
    res = run.result
    chunks = res["chunks"]
    assert res["n_chunks"] == n and [c["index"] for c in chunks] == list(range(n))
    spec = data.video_spec(cfg["scale"])
    assert chunks[0]["start_s"] == 0 and chunks[-1]["end_s"] == pytest.approx(spec.n_frames / spec.fps)
    for a, b in zip(chunks, chunks[1:]):
        assert a["end_s"] == b["start_s"]  # contiguous chunks
    for c in chunks:
        probs = np.asarray(c["probs"])
        assert probs.shape == (1000,)
        assert np.all(probs >= 0) and probs.sum() == pytest.approx(1.0, abs=1e-6)
        assert c["start_s"] <= c["t_s"] < c["end_s"]
        assert c["top1"] == int(np.argmax(probs))
    by_scene = {c["scene"]: c for c in chunks}
    assert set(by_scene) == set(data.PHOTOS)  # n = 6 chunks at this scale: one photo each
    assert by_scene["chelsea"]["top1"] in data.CAT_CLASSES, by_scene["chelsea"]["top5"]
    assert by_scene["coffee"]["top1"] in {967, 968, 504}, by_scene["coffee"]["top5"]  # espresso, cup, coffee mug
    # the scatter: one chunk written per extract step, each read once
    assert writes_of(run, "split_video", "result") == n
    assert len(reads_of(run, "split_video", "result")) == n


#: the shuffle and the broadcast on ours and the stock peer; the scatter (video) on every backend
OURS_AND_PEER = ("cassandra", "s3_stock")


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", OURS_AND_PEER)
def test_word_count(backend, all_servers):
    check_word_count(backend)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", OURS_AND_PEER)
def test_lightgbm_forest(backend, all_servers):
    check_lightgbm_forest(backend)


@pytest.mark.timeout(900)
@pytest.mark.parametrize("backend", BACKENDS)
def test_video_analytics(backend, all_servers):
    check_video_analytics(backend)


def test_partition_is_stable_and_in_range():
    words = ["def", "self", "return", "asgard", "x" * 100]
    assert [word_count.partition(w, 7) for w in words] == [word_count.partition(w, 7) for w in words]
    assert word_count.partition("def", 4) == __import__("zlib").crc32(b"def") % 4
    assert all(0 <= word_count.partition(w, 3) < 3 for w in words)


def test_jobs_build_for_every_app():
    for app in jobs.APPS:
        job = jobs.make_job(app, "fs_stock")
        assert job.name == f"{app}__fs_stock"
        assert jobs.FIRST_OP[app] in {n.name for n in job.nodes}
        assert jobs.FINAL_OP[app] in {n.name for n in job.nodes}
    with pytest.raises(KeyError):
        jobs.make_job("nope", "fs_stock")


@pytest.mark.parametrize("m,r", [(12, 1), (1, word_count.MAX_REDUCERS), (2, 3)])
def test_word_count_fanouts_in_process(tmp_path, m, r):
    """More mappers than files (empty splits), one reducer, all reducers: counts stay exact."""
    import dagster as dg

    scale = 0.01  # a few files
    files = data.stdlib_corpus(scale)
    assert len(files) < 12
    job = jobs.APPS["word_count"].to_job(
        resource_defs={"io_manager": dg.FilesystemIOManager(base_dir=str(tmp_path))},
        executor_def=dg.in_process_executor)
    res = job.execute_in_process(run_config=jobs.run_config("word_count", fanout=m, scale=scale, reducers=r))
    assert res.success
    out = res.output_for_node("merge_counts")
    expected = collections.Counter()
    for rel in files:
        expected.update(word_count.tokenize(data.read_source(rel)))
    assert out["counts"] == dict(expected) and out["n_reducers"] == r and out["n_mappers"] == m
