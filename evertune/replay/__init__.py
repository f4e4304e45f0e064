"""evertune.replay"""
