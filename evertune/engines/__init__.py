"""evertune.engines"""
