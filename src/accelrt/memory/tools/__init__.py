"""The offline memory tools: they read files and replay workloads, never a live device.

* :mod:`.viz` (public as :mod:`accelrt.memory.viz`): snapshots as text and an HTML page
  (``accelrt memory viz``), drawn by :mod:`._viz_page`.
* :mod:`._replay`: a recorded trace replayed through the caching allocator on a simulated
  device (``accelrt replay``).
* :mod:`._tune`: the allocator settings that suit a workload (``accelrt memory tune``).
* :mod:`._synthetic`: synthetic workloads for the replay.
* :mod:`._files`: the one reader of untrusted input files, and safe output.

Nothing here is imported by ``import accelrt``.

Example::

    >>> from accelrt.memory.tools._synthetic import convnet_inference_ops
    >>> len(convnet_inference_ops(batches=1)) > 0
    True
"""
