"""Image decoding shared by the resize step and embedding: see :mod:`vsbench.imaging.jpeg`."""
