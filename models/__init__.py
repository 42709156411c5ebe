"""Built-in cost-model parameter sets (``*.yaml``), shipped as the package data
``simcoll.models``. Schema: :mod:`simcoll.costmodel`."""
