"""The cluster driver (`ClusterDriver`, driver.py) and its collaborators, one concern each:
which configuration is in effect (switching.py), the recipe's pods around a run
(pods.py), the configuration blocks (block_book.py), following a run (follow.py), its
fields (fields.py) and its output on the pod (output.py)."""

from spillover_harness.drivers.cluster.driver import ClusterDriver

__all__ = ["ClusterDriver"]
