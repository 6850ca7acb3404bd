"""The load generator plays the environment: who is active, and what each arm would pay."""
