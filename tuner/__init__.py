"""Rafiki-style tuning of the Cassandra that holds ephemeral op outputs (no Dagster here).

    knobs       the Cassandra 5.0 knob space, Configuration, apply() (live / ALTER / restart)
    workload    workload model and DAG-shaped traffic generator over the real object store
    calibrate   resumable measurement of workloads x configurations (JSONL dataset)
    anova       key-knob ranking, knee selection
    surrogates  Surrogate interface: 20-net [14, 4] MLP ensemble (Rafiki), LightGBM
    evaluate    unseen-configuration / unseen-workload error (Rafiki Table 2)
    search      optuna NSGA-II / TPE and exhaustive grid search over the surrogate
    costbenefit SOPHIA cost-benefit reconfiguration decision
    validate    recommended vs default measured on the real node
    cli         the ``tune`` click group (``asgard tune ...``)
    node        TunerNode: the tuner's own isolated Cassandra instance (127.0.0.5)
"""
