"""Calibration: the few named efficiency constants of gpuscale's analytical models."""

from gpuscale.calibrate.calibration import Calibration, default_calibration

__all__ = ["Calibration", "default_calibration"]
