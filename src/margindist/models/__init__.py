"""One module per estimator. Estimators are thin: parameters, fit orchestration, fitted
attributes; numerical work lives in :mod:`margindist.solvers`."""
