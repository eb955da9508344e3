"""Progressive delivery: a new model version as a canary, judged by its own numbers
(``gates``), stepped up, promoted or rolled back by itself (``policy``), in one loop
that always ends in one or the other (``analysis``)."""
