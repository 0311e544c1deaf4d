"""What several test modules share. A test module imports from here (or from conftest.py), never
from another test module: a test module is collected once, as tests, and nothing else."""
