"""Registers the job board with Airflow: its web app in the api-server and a "Job board" entry in
the UI's navigation that shows the board inside Airflow's own page."""

from airflow.plugins_manager import AirflowPlugin

from streamwarden_airflow.console_app import URL_PREFIX, app


class StreamwardenConsolePlugin(AirflowPlugin):
    name = "streamwarden_console"
    fastapi_apps = [{"app": app, "url_prefix": URL_PREFIX, "name": "Streamwarden job board"}]
    external_views = [
        {
            "name": "Job board",
            "href": f"{URL_PREFIX}/board",
            "destination": "nav",
            "url_route": "job-board",
        }
    ]
