"""evertune.model"""
