"""Fuzz targets for the jscore parsers: each module defines ``one_input(data: bytes) -> None``."""
