"""Regret minimisation on a network (Dubey & Pentland, AAMAS 2020): cooperative UCB whose messages
are differentially private, or robust to Byzantine agents. A baseline beside DE, not part of it:
these agents minimise group regret, DE's identify the best arm.
"""
