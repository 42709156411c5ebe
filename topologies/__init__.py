"""Built-in machine descriptions (``*.yaml``), shipped as the package data
``simcoll.topologies``. Schema: :mod:`simcoll.topology`."""
