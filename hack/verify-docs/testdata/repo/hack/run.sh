#!/usr/bin/env bash
echo one
echo two
