"""The bench without its screens: what the command line and the dashboards both use to build,
run, record, sum up and report runs and suites, and to check the installation. Nothing here
imports Textual or a screen of tui; the screens import from here, never the other way."""
