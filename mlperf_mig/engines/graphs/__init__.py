"""Graph generators: ResNet50-v1.5 and BERT-Large with the official MLPerf interfaces."""
