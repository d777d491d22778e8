"""The exporter and its lifecycle: ``export`` orchestrates one export (the arguments, the
path it takes), ``extract`` reads activities in columnar batches, ``workers`` forks readers,
``background`` and ``handles`` run and wait for exports in a forked process, ``fallback`` is
torch < 2.13's path, ``graphs`` prepares CUDA-graph annotations, ``gzip_writer`` is the
parallel encoder as a file object, and ``profiler`` the torch-facing lifecycle (``profile``,
``schedule``, ``tensorboard_trace_handler``, ``install``)."""
