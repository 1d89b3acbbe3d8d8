"""kplane report: load-test results through PySpark into tables and plots (``pipeline``,
``charts``)."""
