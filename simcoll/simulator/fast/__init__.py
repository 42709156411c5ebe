"""The fast paths of Algorithm mode: the rules of :mod:`simcoll.simulator.reference`,
written again for speed, and tested against it (``tests/test_sim_reference.py``).

- :mod:`.algorithm_mode` — the engine and its dispatcher: per-slot counters
  in place of a process per message; *private* rank pairs (no other pair
  shares their resources) timed without the network; NumPy batches of
  landings; a whole schedule timed in schedule order without events where
  that is sure to give the events' times; the compiled event core; the
  step-pipeline formula. ``stats["path"]`` of a result says which ran.
- :mod:`.plan` — the static part of a run (messages, the reads they wait
  for, FIFO queues), built with NumPy.
- :mod:`.symmetry` — node-rotation quotients: one block of nodes' messages
  run over one resource per orbit (and orbit tables' representatives).
- :mod:`.compiled` — the event handlers as C++ (``csrc/event_core.cpp``),
  bit for bit the Python handlers'.

All of them share the flow sharing of :mod:`simcoll.simulator.network`,
which has its own fast paths (remembered sharing patterns, handovers,
dominated resources, the vectorised max-min), held to the reference's
:func:`~simcoll.simulator.reference.max_min_fair_rates` by the same tests.
"""
