"""LightGBM forest, a *broadcast* fan-out (Asgard paper §3.1.2, Figure 3).

The paper's DAG (after Cirrus, Carreira et al. 2018): the first function runs PCA on the
training data and broadcasts the PCA-transformed data set to ``k`` functions (six in the
paper's evaluation); each trains decision trees on 90% of it with a random 10% for
validation; the last stage combines the models into a forest and tests it on the test data.
The PCA output is written once and read ``k`` times (broadcast: one writer, many readers).

Here, as Dagster ops (every edge passes through the ``io_manager`` resource)::

    prepare_digits.train   --> pca
    prepare_digits.seeds   --> train_booster.map   (DynamicOutput x k: one seed each)
    pca.pca_train          --> train_booster.map   (one write, k reads: the broadcast)
    train_booster.collect  --> combine_forest --> evaluate
    pca.pca_model, prepare_digits.test --> evaluate

* ``prepare_digits`` (config: ``fanout`` = k trainers, ``scale`` = how many augmented copies
  of scikit-learn's digits) splits train/test and emits one tiny DynamicOutput (a seed) per
  trainer. ``pca`` fits PCA on the training split; its ``pca_train`` output is the broadcast
  object: every mapped ``train_booster`` step reads the same stored output.
* ``train_booster`` trains a multiclass LightGBM booster on a seeded random 90% with early
  stopping on the other 10%, and outputs the model as text.
* ``combine_forest`` (fan-in) gathers the boosters; ``evaluate`` averages their predicted
  class probabilities on the PCA-transformed test split and reports accuracy.
"""

import time

import dagster as dg
import numpy as np

from asgard.pipelines import data


class ForestConfig(dg.Config):
    """Run config of ``prepare_digits``."""

    fanout: int = 6  # k: how many LightGBM trainers read the broadcast PCA output
    scale: float = 20  # the digits set replicated (with shifts and noise) round(scale) times, at least once
    n_components: int = 40  # PCA dimensions
    num_boost_round: int = 100  # upper bound; early stopping on the 10% validation split
    learning_rate: float = 0.2
    num_leaves: int = 15
    max_bin: int = 63
    seed: int = 0


@dg.op(out={"train": dg.Out(dict), "test": dg.Out(dict), "seeds": dg.DynamicOut(dict)})
def prepare_digits(context: dg.OpExecutionContext, config: ForestConfig):
    """Load the digits, split train/test, replicate ``scale`` times; one seed per trainer."""
    if config.fanout < 1:
        raise dg.Failure(f"fanout must be >= 1, got {config.fanout}")
    replicas = max(1, round(config.scale))
    d = data.digits_dataset(scale=replicas, seed=config.seed)
    context.log.info(f"digits x{replicas}: train {d['x_train'].shape}, test {d['x_test'].shape}")
    params = {"n_components": config.n_components, "num_boost_round": config.num_boost_round,
              "learning_rate": config.learning_rate, "num_leaves": config.num_leaves, "max_bin": config.max_bin}
    yield dg.Output({"x": d["x_train"], "y": d["y_train"], "params": params}, "train",
                    metadata={"rows": len(d["y_train"]), "bytes": int(d["x_train"].nbytes)})
    yield dg.Output({"x": d["x_test"], "y": d["y_test"], "original": d["test_original"]}, "test",
                    metadata={"rows": len(d["y_test"])})
    for i in range(config.fanout):
        yield dg.DynamicOutput({"trainer": i, "seed": config.seed * 1000 + i, "params": params},
                               output_name="seeds", mapping_key=f"trainer_{i:03d}")


@dg.op(out={"pca_train": dg.Out(dict), "pca_model": dg.Out(dict)})
def pca(context: dg.OpExecutionContext, train: dict):
    """Fit PCA on the training split; ``pca_train`` is what every trainer reads (the broadcast)."""
    from sklearn.decomposition import PCA

    n_components = min(train["params"]["n_components"], train["x"].shape[1], len(train["y"]))
    t0 = time.perf_counter()
    model = PCA(n_components=n_components, random_state=0).fit(train["x"])
    z = model.transform(train["x"]).astype(np.float32)
    context.log.info(f"PCA {train['x'].shape} -> {z.shape} in {time.perf_counter() - t0:.2f} s, "
                     f"explained variance {model.explained_variance_ratio_.sum():.3f}")
    yield dg.Output({"z": z, "y": train["y"]}, "pca_train",
                    metadata={"rows": len(z), "bytes": int(z.nbytes)})
    yield dg.Output({"mean": model.mean_.astype(np.float64), "components": model.components_.astype(np.float64),
                     "explained_variance": float(model.explained_variance_ratio_.sum())}, "pca_model")


@dg.op
def train_booster(context: dg.OpExecutionContext, seed: dict, pca_train: dict) -> dict:
    """Train one LightGBM multiclass booster on a random 90% of the broadcast data (10% validation)."""
    import lightgbm as lgb

    z, y = pca_train["z"], pca_train["y"]
    p = seed["params"]
    rng = np.random.default_rng(seed["seed"])
    perm = rng.permutation(len(y))
    n_val = max(1, len(y) // 10)
    val, tr = perm[:n_val], perm[n_val:]
    params = {
        "objective": "multiclass", "num_class": 10, "learning_rate": p["learning_rate"],
        "num_leaves": p["num_leaves"], "max_bin": p["max_bin"], "min_data_in_leaf": 10, "feature_fraction": 0.8,
        "bagging_fraction": 0.8, "bagging_freq": 1, "seed": seed["seed"], "num_threads": 1,
        "verbose": -1, "deterministic": True,
    }
    t0 = time.perf_counter()
    dtrain = lgb.Dataset(z[tr], label=y[tr])
    dval = lgb.Dataset(z[val], label=y[val], reference=dtrain)
    booster = lgb.train(params, dtrain, num_boost_round=p["num_boost_round"], valid_sets=[dval],
                        callbacks=[lgb.early_stopping(10, verbose=False)])
    val_acc = float((booster.predict(z[val], num_iteration=booster.best_iteration).argmax(1) == y[val]).mean())
    elapsed = time.perf_counter() - t0
    context.log.info(f"trainer {seed['trainer']}: {booster.best_iteration} rounds, "
                     f"validation accuracy {val_acc:.4f}, {elapsed:.2f} s")
    return {"trainer": seed["trainer"], "seed": seed["seed"], "best_iteration": int(booster.best_iteration),
            "val_accuracy": val_acc, "train_s": elapsed,
            "model": booster.model_to_string(num_iteration=booster.best_iteration)}


@dg.op
def combine_forest(models: list) -> dict:
    """Fan-in: the boosters, in trainer order, form the forest (text models, no live objects)."""
    rows = sorted(models, key=lambda m: m["trainer"])
    return {"models": [m["model"] for m in rows],
            "members": [{k: v for k, v in m.items() if k != "model"} for m in rows]}


@dg.op
def evaluate(context: dg.OpExecutionContext, forest: dict, pca_model: dict, test: dict) -> dict:
    """Average the members' class probabilities on the PCA-transformed test split: accuracy."""
    import lightgbm as lgb

    z = ((test["x"].astype(np.float64) - pca_model["mean"]) @ pca_model["components"].T).astype(np.float32)
    y = test["y"]
    probs = np.zeros((len(y), 10))
    member_acc = []
    for text in forest["models"]:
        p = lgb.Booster(model_str=text).predict(z, num_threads=1)
        member_acc.append(float((p.argmax(1) == y).mean()))
        probs += p
    probs /= max(1, len(forest["models"]))
    pred = probs.argmax(1)
    orig = test["original"]
    result = {
        "app": "lightgbm_forest",
        "n_trainers": len(forest["models"]),
        "accuracy": float((pred == y).mean()),
        "accuracy_original": float((pred[orig] == y[orig]).mean()),  # the unaugmented digits test split
        "member_accuracy": member_acc,
        "n_test": int(len(y)),
        "n_test_original": int(orig.sum()),
        "pca_explained_variance": pca_model["explained_variance"],
        "members": forest["members"],
    }
    context.add_output_metadata({
        "accuracy": result["accuracy"], "accuracy_original": result["accuracy_original"],
        "n_trainers": result["n_trainers"], "member_accuracy": dg.MetadataValue.json(member_acc),
    })
    context.log.info(f"forest of {result['n_trainers']}: accuracy {result['accuracy']:.4f} "
                     f"(original test digits {result['accuracy_original']:.4f})")
    return result


@dg.graph
def lightgbm_forest():
    """LightGBM forest (Asgard §3.1.2): PCA broadcast to k trainers, forest tested on the test split."""
    train, test, seeds = prepare_digits()
    pca_train, pca_model = pca(train)
    models = seeds.map(lambda s: train_booster(s, pca_train))
    evaluate(combine_forest(models.collect()), pca_model, test)
