"""Charts (matplotlib, imported lazily with the Agg backend): one module per chart family.

- :mod:`roofprof.plots.roofline`: rooflines with ops/kernels placed on them.
- :mod:`roofprof.plots.sweeps`: working-set staircase and intensity sweep.
- :mod:`roofprof.plots.hierarchical`: the counters' L1/L2/DRAM hierarchical roofline.
"""


def pyplot():
    """matplotlib.pyplot with the non-interactive Agg backend."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
