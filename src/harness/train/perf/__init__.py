"""How fast a run goes and what keeps it from going faster; the package imports nothing itself.

readout.py   the step's one copy to the host"""
