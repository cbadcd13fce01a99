"""DAG file parse time: `DagBag(dag_folder=dags/)` in fresh interpreters, as the dag-processor parses.

python -m benchmarks.dag_parse [--rounds N] [--against CHECKOUT]

Each round is a new interpreter with a throwaway AIRFLOW_HOME and the checkout's conf/: it times
importing Airflow's DagBag, then parsing dags/, and reports the DAGs, the import errors and
whether pyspark got loaded. Baselines measured in the same run: a fresh interpreter importing
pyspark.sql (what every parse would pay on top if the DAG path imported pyspark), and with
`--against`, another checkout of the repo (e.g. `git archive <commit>` unpacked) parsed in
alternating rounds with the same .venv, its own directory first on sys.path.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

# Runs in the child; its last stdout line is the JSON result (Airflow logs to stdout before it).
PARSE_ROUND = """
import json, sys, time

started, started_cpu = time.perf_counter(), time.process_time()
from airflow.dag_processing.dagbag import DagBag
imported, imported_cpu = time.perf_counter(), time.process_time()
bag = DagBag(dag_folder=sys.argv[1])
parsed, parsed_cpu = time.perf_counter(), time.process_time()
print(json.dumps({
    "airflow_import_seconds": imported - started,
    "airflow_import_cpu_seconds": imported_cpu - started_cpu,
    "parse_seconds": parsed - imported,
    "parse_cpu_seconds": parsed_cpu - imported_cpu,
    "dags": len(bag.dag_ids),
    "import_errors": sorted(bag.import_errors),
    "pyspark_loaded": any(m == "pyspark" or m.startswith("pyspark.") for m in sys.modules),
}))
"""

IMPORT_PYSPARK = """
import time

started = time.perf_counter()
import pyspark.sql
print(time.perf_counter() - started)
"""


@dataclass(frozen=True)
class ParseRound:
    airflow_import_seconds: float
    airflow_import_cpu_seconds: float
    parse_seconds: float
    parse_cpu_seconds: float
    dags: int
    import_errors: list[str]
    pyspark_loaded: bool

    def line(self) -> str:
        return (
            f"airflow import {self.airflow_import_seconds:.2f} s "
            f"(cpu {self.airflow_import_cpu_seconds:.2f} s), "
            f"DagBag parse {self.parse_seconds:.2f} s (cpu {self.parse_cpu_seconds:.2f} s), "
            f"{self.dags} DAGs, {len(self.import_errors)} import errors, "
            f"pyspark loaded: {self.pyspark_loaded}"
        )


def run_child(code: str, *args: str, cwd: Path, env: dict[str, str]) -> str:
    """The last stdout line of `python -c code args` in a fresh interpreter."""
    result = subprocess.run(
        [sys.executable, "-c", code, *args], cwd=cwd, env=env, capture_output=True, text=True, check=False
    )
    if result.returncode != 0:
        raise SystemExit(f"benchmark child failed ({result.returncode}):\n{result.stderr[-4000:]}")
    return result.stdout.strip().splitlines()[-1]


def parse_round(checkout: Path, airflow_home: Path) -> ParseRound:
    """Parse `checkout`/dags in a fresh interpreter whose working directory is the checkout."""
    env = os.environ | {
        "AIRFLOW_HOME": str(airflow_home),
        "AIRFLOW__CORE__DAGS_FOLDER": str(checkout / "dags"),
        "AIRFLOW__CORE__PLUGINS_FOLDER": str(checkout / "plugins"),
        "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
    }
    return ParseRound(**json.loads(run_child(PARSE_ROUND, str(checkout / "dags"), cwd=checkout, env=env)))


def summary(label: str, rounds: list[ParseRound]) -> tuple[float, float]:
    """Print the medians of `rounds`; return the median parse wall and CPU seconds."""
    parse = statistics.median(r.parse_seconds for r in rounds)
    parse_cpu = statistics.median(r.parse_cpu_seconds for r in rounds)
    airflow_import = statistics.median(r.airflow_import_seconds for r in rounds)
    airflow_import_cpu = statistics.median(r.airflow_import_cpu_seconds for r in rounds)
    print(f"== {label} (medians of {len(rounds)})")
    # CPU time is the steadier figure on a busy machine; wall time is what the dag-processor waits.
    print(f"DagBag parse of dags/: {parse:.2f} s (cpu {parse_cpu:.2f} s)")
    print(f"airflow import: {airflow_import:.2f} s (cpu {airflow_import_cpu:.2f} s)")
    print(f"DAGs: {sorted({r.dags for r in rounds})}")
    print(f"import errors: {sorted({e for r in rounds for e in r.import_errors}) or 'none'}")
    print(f"pyspark loaded by the parse: {any(r.pyspark_loaded for r in rounds)}")
    return parse, parse_cpu


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.dag_parse", description=__doc__.splitlines()[0]
    )
    parser.add_argument("--rounds", type=int, default=5, help="fresh interpreters to time (median)")
    parser.add_argument("--against", type=Path, help="another checkout to parse in alternating rounds")
    args = parser.parse_args(argv)
    checkouts = [REPO] + ([args.against.resolve()] if args.against else [])

    rounds: dict[Path, list[ParseRound]] = {checkout: [] for checkout in checkouts}
    with tempfile.TemporaryDirectory(prefix="warden-dag-parse-") as airflow_home:
        for number in range(1, args.rounds + 1):
            for checkout in checkouts:
                result = parse_round(checkout, Path(airflow_home))
                rounds[checkout].append(result)
                print(f"round {number} {checkout}: {result.line()}", flush=True)
    pyspark_import = statistics.median(
        float(run_child(IMPORT_PYSPARK, cwd=REPO, env=dict(os.environ))) for _ in range(args.rounds)
    )

    parse, parse_cpu = summary(str(REPO), rounds[REPO])
    if args.against:
        against, against_cpu = summary(str(checkouts[1]), rounds[checkouts[1]])
        print(
            f"== parse ratio, this checkout / {checkouts[1]}: {parse / against:.2f} wall, "
            f"{parse_cpu / against_cpu:.2f} cpu"
        )
    print(f"== baseline, import pyspark.sql in a fresh interpreter (median): {pyspark_import:.2f} s")
    return 0 if not any(r.import_errors for r in rounds[REPO]) else 1


if __name__ == "__main__":
    sys.exit(main())
