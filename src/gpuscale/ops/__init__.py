"""Operating a cluster: reliability (failures, checkpoint interval, goodput)."""
