"""Adiyan workbench."""
import warnings as _warnings

__version__ = "0.1.0"

# In a notebook kernel without ipywidgets, tqdm.auto falls back to text progress bars and says
# so in every executed notebook; the text bars are what we want.
_warnings.filterwarnings("ignore", message="IProgress not found", module="tqdm")
