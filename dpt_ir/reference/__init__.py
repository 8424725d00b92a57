"""The NumPy reference interpreter and the NumPy references (``*_ref``) of the ops that
need more than a line of NumPy: the oracle of every test."""
