"""What the tasks show: live progress lines (``display``), result tables (``tables``),
charts people would rather look at than read (``charts``)."""
