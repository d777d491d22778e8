"""The tools over existing trace files, one module per tool: ``check``, ``repair``,
``compress``, ``split`` (split and filter), ``merge``, ``summary``. Each takes paths, calls
the native module with the GIL released and returns a typed result; the command line
(``kinetrace._cli``) is a thin layer over them."""
