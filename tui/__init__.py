"""streambench's terminal front end: the live dashboard and the command line.

This is the only package that imports Textual; the engine (loadgen, collectors, analysis,
compose) runs headless.
"""
