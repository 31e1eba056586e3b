"""Embedded tasks: small translation tasks generated in code, so that training needs no download."""
