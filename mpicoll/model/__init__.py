"""The performance model: alpha-beta-gamma costs (:mod:`.alphabeta`) and their calibration on
the machine in use (:mod:`.calibrate`)."""

from .alphabeta import DEFAULT, Model, current, default_path, load, save, use

__all__ = ["DEFAULT", "Model", "current", "default_path", "load", "save", "use"]
