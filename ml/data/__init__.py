"""Data: the raw Fashion-MNIST files (``raw``), the prepared tfds dataset and its
splits (``dataset``), ``python -m ml ingest`` (``ingest``), the scaling every signature
and the training input share (``preprocess``, ``pipeline``), the sample request
(``sample``)."""
