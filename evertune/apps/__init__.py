"""Applications: what people run, built on the services and the layers below.

The command line, the closed-loop demo, the benchmarks, the harness tests and benchmarks share to
drive evertune from outside, and the registry of services `evertune up` starts. Only this layer
(and the services themselves) imports a service.
"""
