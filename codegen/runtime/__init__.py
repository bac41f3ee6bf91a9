"""Runtime sources several targets share (codegen/source.py): ordinary Python modules whose definitions the
templates copy into generated modules, so that the generated modules stay standalone.  Read as text by the code
generators, never imported by the engine."""
