"""The LoadGen harness: settings, sample libraries, SUTs, logs and accuracy."""
