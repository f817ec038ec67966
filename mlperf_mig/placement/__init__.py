"""Where the instances of a run go: one place decides it, before anything starts.

    choose.py          `place(request, catalog=...)`, the one entry: the request's options pick
                       one of the three placements below, and the answer is one Deployment
    one_gpu.py         one GPU: its live MIG devices, a MIG-backed vGPU, the whole GPU
                       time-shared, or emulated partitions on this machine's CPUs
    fleet.py           a fleet of GPUs of this host (`gpus`, `layouts`, `gpu_count`), each
                       resolved as one GPU is and joined into one deployment
    nodes.py           what a cluster node offers (NodeInventory, plain data) and the layout
                       on the GPUs (or CPUs) of a Ray cluster's nodes
    deployment.py      what is decided: Deployment, GpuPart and InstanceSlot, and how a system
                       of GPUs is joined and named
    host.py            what this host can start (memory and open files of the instances)
    cluster_address.py the grammar of a `--cluster` value

Placement reads the registry (layouts, profiles, the one device matcher) and the emulated CPU
budgets (emulation/); it imports nothing of the runner or the cluster. A cluster's nodes are
handed in by whoever holds its session (`choose.nodes_handed`): placement knows no Ray.
"""

from mlperf_mig.placement.choose import place

__all__ = ["place"]
