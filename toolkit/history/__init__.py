"""Tracked upstream history: measure a recipe at each new upstream release or commit (`points`,
`track`), read the series back (`series`), find its change points with Apache Otava in an env of its
own (`otava`), and bisect each new change point to the commit that caused it (`autobisect`)."""
