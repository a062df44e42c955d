"""Process group set-up and every collective the project uses."""
