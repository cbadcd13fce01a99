"""Streamwarden's DAGs: one supervision DAG per job in conf/jobs/, operator request DAGs, and
the platform housekeeping DAG. Built by the factory; this file only registers them."""

from streamwarden_airflow.dag_factory import build_dags

for _dag in build_dags():
    globals()[_dag.dag_id] = _dag
