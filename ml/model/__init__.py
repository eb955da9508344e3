"""The model: the architectures and their registry (``architectures``), the
SavedModel export and its signatures (``export``), TensorFlow's errors in one line
(``tf_errors``)."""
