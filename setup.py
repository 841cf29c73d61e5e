"""The package list, which pyproject.toml cannot say: ``strategies/`` sits at the top of
the tree (a layer users import on its own) and installs as ``chaoslight.strategies``."""

from setuptools import find_packages, setup

setup(
    packages=[*find_packages(include=["chaoslight", "chaoslight.*"]), "chaoslight.strategies"],
    package_dir={"chaoslight.strategies": "strategies"},
)
