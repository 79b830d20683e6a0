"""vflcrypto's vertical logistic regression as a Flower App (ServerApp = active party)."""
