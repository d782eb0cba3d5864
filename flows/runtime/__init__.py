"""The run's runtime: the Prefect API and the Ray cluster it uses (embedded, attached or a project's server),
where its tasks execute, its locks, its Ctrl-C, its progress events and their view. Imports nothing of the
command line (``flows/cli``) or of the flows (``flows/``)."""
