"""streambench's terminal front end: the Textual dashboard and the command line."""
