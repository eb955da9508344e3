"""The client seam: every read and write the cluster path makes (``kube``), reading the
objects it waits for (``objects``), kubectl's errors sorted into retried and final
(``kubectl_errors``) and whose an object is (``ownership``)."""
