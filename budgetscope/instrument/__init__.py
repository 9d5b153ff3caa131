"""instrument"""
