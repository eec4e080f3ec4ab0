"""The standalone door: a DAG file through `smartsensor submit` (registration, dagfile), and what only its tasks
need, the scheduler and classic runs (`run-task`). Above the service core, below the entry points; it never
imports the external door."""
