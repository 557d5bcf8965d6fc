"""offloadsim: predict, plan and validate weight streaming for models larger than GPU memory."""
__version__ = "0.1.0"
