"""The data checks of the preflight: bugs planted in loaders and in a fork's own DataModules, each caught in the
row that names it; correct pipelines raise nothing."""
