"""The system registry: MIG-capable GPUs, their profiles and placements, layouts, discovery."""
