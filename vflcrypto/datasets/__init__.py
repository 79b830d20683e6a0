"""Example data bundled with vflcrypto (no download): Titanic, bank/shop, synthetic splits."""
