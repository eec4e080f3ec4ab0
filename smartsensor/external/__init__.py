"""The external door: another scheduler's (Airflow's) tries, registered by their own key through
`POST /api/v1/tasks` (registration), and the states answers read back by that key (states, ended_watch). Above the
service core, below the entry points; it never imports the standalone door."""
