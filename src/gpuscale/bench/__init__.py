"""Real benchmarks on real hardware (torch.distributed); torch is imported lazily."""
